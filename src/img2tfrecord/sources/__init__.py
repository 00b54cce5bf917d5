"""Where the images come from, without Beam: layouts, files, archive members, manifest rows."""

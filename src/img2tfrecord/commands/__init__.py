"""The commands' glue: parse their options, call the library, print (``cli.py`` dispatches to them)."""

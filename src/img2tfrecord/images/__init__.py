"""Images in, stored images out: decode, validate, orient, resize, encode, pixel statistics (Pillow; JPEGs to
resize through libjpeg-turbo and OpenCV with --resample fast).

Import each name from its module: ``images.options`` (the option constants the CLI parser needs, without
Pillow), ``images.convert``, ``images.statistics``, ...
"""

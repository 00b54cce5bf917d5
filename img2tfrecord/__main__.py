import sys

from img2tfrecord.cli import main

sys.exit(main())

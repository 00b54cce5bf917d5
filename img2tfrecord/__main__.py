import sys

from img2tfrecord.cli import main

if __name__ == "__main__":
    sys.exit(main())

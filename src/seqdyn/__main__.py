"""``python -m seqdyn`` works like the ``seqdyn`` command."""

from seqdyn.cli import main

if __name__ == "__main__":
    main()

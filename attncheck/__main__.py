"""``python -m attncheck`` runs the command line."""

from attncheck.cli import main

if __name__ == "__main__":
    main()

"""`python -m pipeline RUN_DIR [...]`: an alias of `splitlab analyze RUN_DIR [...]` (the same verb of the one tree)."""
import sys

from chaos.cli.main import main

sys.exit(main(["analyze", *sys.argv[1:]]))

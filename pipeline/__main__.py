"""`python -m pipeline RUN_DIR [--master URL] [--check-param name.key=value ...]`: same as `splitlab analyze`."""
from pipeline.cli import main

main()

"""The `splitlab` command line: one argparse tree (`main.py`) for every verb; each room's verbs in its own
module (`cluster`, `faults`, `scenarios`, `analysis`, `fuzz`), what they share (parser, flags, progress on
stderr) in `verbs.py`."""

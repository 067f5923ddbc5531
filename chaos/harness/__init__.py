"""The scenario harness: scenario files, the runner on any network backend (containers, simulator), the realised
schedule and replay, and the verdict against a scenario's expectations.

    schema.py    the scenario's shape (pydantic)          load.py      YAML -> validated scenario, file:line errors
    yamlsrc.py   YAML with the line of every value        nodeenv.py   cluster settings -> node environments
    actions.py   one step through a run's Net             torture.py   random fault mixes from one seed
    timeline.py  when steps fire (at_s, after), ends      runner.py    a whole run on a backend (docker, sim)
    faultstate.py message rules, link faults rebuilt      injection.py what an inject step sends
    schedule.py  the realised schedule, replay            progress.py  terminal output (rich)
    expect.py    expectations and verdicts                demo.py      `make demo`: JGRP-1873, both variants
"""
from chaos.harness.errors import Problem, ScenarioError
from chaos.harness.load import Loaded, load_scenario, load_text

__all__ = ["Loaded", "Problem", "ScenarioError", "load_scenario", "load_text"]

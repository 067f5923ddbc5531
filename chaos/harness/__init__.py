"""The scenario harness: scenario files, the runner on real containers, the realised schedule and replay, the
simulator backend, and the verdict against a scenario's expectations.

    schema.py    the scenario's shape (pydantic)          load.py      YAML -> validated scenario, file:line errors
    yamlsrc.py   YAML with the line of every value        nodeenv.py   cluster settings -> node environments
    actions.py   one step on a running cluster            runner.py    a whole run on containers
    timeline.py  when steps fire (at_s, after), ends      simrun.py    a whole run in the simulator
    faultstate.py message rules, link faults rebuilt      injection.py what an inject step sends
    schedule.py  the realised schedule, replay            progress.py  terminal output (rich)
    expect.py    expectations and verdicts                cli.py       `splitlab run | replay | sim`
"""
from chaos.harness.errors import Problem, ScenarioError
from chaos.harness.load import Loaded, load_scenario, load_text

__all__ = ["Loaded", "Problem", "ScenarioError", "load_scenario", "load_text"]

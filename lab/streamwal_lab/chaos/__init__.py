"""Fault scenarios against the real stack, checked by the history checker.

``streamwal chaos`` (:mod:`streamwal_lab.chaos.cli`) runs them; tests run them with fewer rounds.
"""

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult, markdown_table, text_table
from streamwal_lab.chaos.runner import run_scenario, run_scenarios
from streamwal_lab.chaos.scenarios import SCENARIOS, Scenario

__all__ = [
    "SCENARIOS",
    "ChaosEnv",
    "Scenario",
    "ScenarioResult",
    "markdown_table",
    "run_scenario",
    "run_scenarios",
    "text_table",
]

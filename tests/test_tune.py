"""`specchat tune` on the real default pair: measures, predicts, saves what auto starts from."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specchat.cli import app
from specchat.tuning import FULL_BATCHES, conditional_rates

pytestmark = pytest.mark.real


def test_tune_saves_costs_and_acceptance(default_pair_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["tune", "-n", "8", "--ctx", "1024"])
    assert result.exit_code == 0, result.output
    assert "predicted" in result.stdout and "auto starts from" in result.stdout
    saved = list((tmp_path / "tuning").glob("*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert data["source"] == "tune"
    assert set(data["verify_s"]) == {str(n) for n in FULL_BATCHES} and data["draft_step_s"] > 0
    assert 0.0 <= data["priors"]["draft-model"] <= 1.0
    modes = {e["mode"] for e in data["details"]["estimates"]}
    assert modes == {"target", "spec", "ngram"}


def test_conditional_rates():
    # 10 rounds drafted position 1, 8 accepted it; all 8 reached position 2, 4 accepted.
    assert conditional_rates([10, 8], [8, 4]) == [0.8, 0.5]
    assert conditional_rates([5, 0], [0, 0]) == [0.0, 0.0]

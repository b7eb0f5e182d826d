"""`tune` as a person reads it at 80 columns: real local Ray, real CPU trials of the tiny model.

The demo's output must not confuse (issue 11, item 6): the bar's count and the result's trial
count are the study's own, pruned proposals read `not run`. And a hostile name never reaches
the terminal as escapes or markup (item 8). One run serves every check here: a `tune` costs
about 30 s on a 2-core machine.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

import pytest
import yaml

from autotuner.purpose import Purpose
from autotuner.storage.models import Trial, TrialState
from tests.coordinator.test_tune_e2e import REPO, cli
from tests.unit.test_cli_render import no_escapes

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# Rich markup, a style and a link: what a space file can name (control bytes it cannot: a space
# with an ESC in its name is refused when it is read, tests/search/test_spaces.py).
MARKUP = "[bold red]x[/] [link=http://evil]click[/link]"


@dataclass
class Demo:
    proc: subprocess.CompletedProcess[str]
    trials: list[Trial]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The README's demo on cpu-demo, but its space named MARKUP (the one name `tune` prints),
    its global batch held at 24 sequences so micro-batches 16 and 32 are pruned, and its
    proposals random, unguided (the guided ones avoid what would be pruned; the seeds only take
    micro-batches that divide the batch): the pruned ones take trial numbers beyond the
    budget's."""
    from autotuner.storage.session import Database
    from autotuner.storage.trial_repo import TrialRepo

    folder = tmp_path_factory.mktemp("demo")
    space = yaml.safe_load((REPO / "search_spaces/cpu-demo.yaml").read_text())
    (folder / "space.json").write_text(json.dumps({**space, "name": MARKUP}))
    db = f"sqlite:///{folder / 'r.db'}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COLUMNS", "80")
        proc = cli(
            "tune", "examples/tiny.yaml", "--space", str(folder / "space.json"),
            "--global-batch", "1536", "--trials", "4", "--db", db,
            # Unguided proposals: the guided ones screen out what would be pruned.
            "--sampler", "random", "--option", "guided=false",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    study_id = proc.stderr.split("study ", 1)[1].split(":", 1)[0].strip()
    with Database(db).read() as s:
        trials = TrialRepo(s).list(study_id)
        s.expunge_all()  # read after the session: the rows' columns are loaded already
    return Demo(proc, trials)


def test_the_counts_printed_are_the_trials_stored(demo: Demo) -> None:
    out, err = demo.proc.stdout, demo.proc.stderr
    pruned = {t.number for t in demo.trials if t.state == TrialState.PRUNED}
    counted = [t for t in demo.trials if t.state != TrialState.PRUNED and t.retry_of is None]
    assert pruned, err  # the wording under test was printed
    bar = re.search(r"^trials .*? (\d+)/(\d+) ", err, re.MULTILINE)
    assert bar is not None, err
    assert (int(bar[1]), int(bar[2])) == (len(counted), 4), err
    recorded = re.search(r"│ #(\d+) \((\d+) recorded, pruned included\)", out)
    assert recorded is not None, out
    assert int(recorded[2]) == len(demo.trials), out  # the trial numbers pruned ones took too
    best = next(t for t in demo.trials if t.number == int(recorded[1]))
    assert best.state == TrialState.COMPLETE, out
    # Each pruned proposal says `not run` (never `skipped (no GPU time)` on a CPU); each
    # measured trial its throughput.
    assert {int(n) for n in re.findall(r"^#(\d+) not run: ", err, re.MULTILINE)} == pruned, err
    assert "skipped" not in out + err and "GPU time" not in out + err
    for t in counted:
        if t.state == TrialState.COMPLETE:
            # The expert default is labelled as what the winner is compared with.
            label = "expert default: " if t.purpose == Purpose.EXPERT_DEFAULT else ""
            assert re.search(rf"^#{t.number} {label}[\d,]+ tok/s ", err, re.MULTILINE), err


def test_every_line_fits_80_columns(demo: Demo) -> None:
    text = demo.proc.stdout + demo.proc.stderr
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text  # nothing cut to fit either


def test_a_hostile_space_name_is_printed_as_text(demo: Demo) -> None:
    text = demo.proc.stdout + demo.proc.stderr
    assert no_escapes(text), text
    # The markup is shown, not obeyed (the line may wrap at 80).
    assert f": space {MARKUP}" in " ".join(demo.proc.stderr.split()), text

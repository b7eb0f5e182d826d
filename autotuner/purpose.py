"""Why a trial ran: the `purpose` stored with every trial row, and the groups readers ask about.

The values are the strings stored in `trials.purpose`; a StrEnum member compares and hashes
equal to its string, so rows read back as plain strings match the members.
"""

from __future__ import annotations

from enum import StrEnum


class Purpose(StrEnum):
    # A proposal of the search (the sampler or the throughput model).
    SEARCH = "search"
    # A seed of the space (search/seeding.py) other than the expert default.
    SEED = "seed"
    # The expert default's trials (search/seeding.py): the seed the recommendation is compared
    # with (study/recommend.py `vs_expert_default`), marked so because it need not run first (a
    # clearly faster seed may run before it) and its first trial may fail, be retried or be
    # pruned for its twin: no trial number says which trial it is.
    EXPERT_DEFAULT = "expert-default"
    # A top config again in a fresh process (search/remeasure.py), pooled with its first run.
    REMEASURE = "remeasure"
    # A multi-GPU study's last trial: its best config on one GPU, for the scaling efficiency.
    REFERENCE = "reference"
    # The numerics check of the winner (search/numerics.py): a loss-parity trial of the
    # candidate, and of the same knobs at the reference precision.
    PARITY = "parity"
    PARITY_REFERENCE = "parity-ref"
    # The headroom check of the winner (search/headroom_check.py): the config once more, with an
    # evaluation pass and a checkpoint save after the timed repeats, for its real peak.
    HEADROOM = "headroom"
    # A proxy trial (options.proxy_layers): a candidate's knobs on a shallower model of the same
    # width, run to teach the throughput and memory models about a kind of config (its
    # precision, compile mode, attention, checkpointing) before a full-depth trial is spent on
    # it.
    PROXY = "proxy"


# The trials that are not measurements of a candidate config (the winner's end checks, and
# proxies): never told to the sampler, never candidates, no lessons for the cost model (their
# configs or their protocol differ), except a proxy's, which the policy learns from with its
# own model (policy.observe).
END_CHECKS = frozenset(
    {Purpose.REFERENCE, Purpose.PARITY, Purpose.PARITY_REFERENCE, Purpose.HEADROOM, Purpose.PROXY}
)
# A study's search trials: its seeds and its proposals (neither re-runs nor end checks).
SEARCH_TRIALS = frozenset({Purpose.EXPERT_DEFAULT, Purpose.SEED, Purpose.SEARCH})

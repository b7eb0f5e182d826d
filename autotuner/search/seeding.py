"""Seeding a study: where the search starts, before the sampler has learned anything.

1. The expert default: the space's `defaults`, then an engineer's first choices where the space
   allows them (bf16, a fused attention kernel, compile default, no checkpointing, fused AdamW,
   padded vocab), and the largest micro-batch the cost model is confident fits the memory
   with the headroom kept (options.headroom); where none fits without checkpointing, with the
   checkpointing that lets one fit, else the config predicted to need the least. It runs
   second, after its fastest alternative, where that one is another precision the throughput
   model's prior expects FIRST_IF_FASTER times as fast, the study has no time budget and the
   expert surely fits: the same trials up front, the likely winner one trial sooner. Its trials
   are marked `expert-default` (Purpose.EXPERT_DEFAULT): the recommendation's yardstick.
2. Winners of earlier completed studies on the same GPU (device name and compute capability)
   and model family, newest first and the same preset first, mapped into this space (a value
   the space lacks takes the expert's) and kept only if they pass the policy's screen.
3. The expert default's closest alternatives: the other fused attention kernel, CUDA graphs
   (reduce-overhead), fp8 where the GPU has it (with the fused attention kernel the prior
   expects fastest: a precision's seed may be its only trial),
   where the expert had to recompute to fit, the 8-bit AdamW with the least checkpointing that
   fits, and where the expert may not fit but would under the expandable-segments allocator,
   its own config with that allocator, from which the other alternatives then start: the local
   search an engineer would do by hand, and the sampler's first evidence about the knobs that
   matter most; fastest predicted first (the throughput model's prior). The next micro-batch
   up is not planned here, from the prior before any trial ran: once a measured peak leaves
   room for it, search/micro_batch_up.py proposes it, for whichever config leads.

Not every alternative runs up front (`SeedPlan`). Once the expert default and the fastest
alternative are measured, the throughput model can say where to go next: on the Llama 3B H200
landscape it proposed the best config (fp8, CUDA graphs, cuDNN) as its first pick, but only
after three bf16 alternatives had run first, 240 GPU-seconds that told it little it needed.
So the expert default, earlier winners, the fastest alternative and any other precision (every
precision the GPU supports gets one trial) run first, and so do the alternatives that make room
where the expert default may not fit (the expandable allocator, then the 8-bit AdamW: they may
be the only configs that leave the headroom); the other alternatives wait until the model has
nothing worth a trial (options.seeds_yield; the study runs them before the sampler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotuner.search.domains import domain_values, first_value, in_domain, sorted_sizes
from autotuner.search.headroom import usable_gib
from autotuner.search.rules import decided_verdict
from autotuner.search.seed_history import earlier_winners
from autotuner.search.space import IntRange
from autotuner.spec import Knobs, Optimizer, canonical_params
from autotuner.storage.session import Database

if TYPE_CHECKING:
    from autotuner.search.context import SearchContext

    # The policy's screen: why not to launch these params (None: launch them).
    Screen = Callable[[dict[str, Any], Knobs], object | None]

Z_SEED = 1.0  # the expert's micro-batch fits at the prediction's pessimistic end (mean + 1 sd)
LEAST_NEED_TIE = 0.01  # where nothing surely fits: needs this close to the least count as equal
KERNEL_TIE = 0.005  # a kernel predicted this little faster keeps the expert's (no evidence)
# The fastest alternative, where it is another precision, runs before the expert default where
# the prior predicts it this many times as fast. The prior's fp8/bf16 ratio of the seeds on the
# H200: GPT-2 124M 1.10 (fp8 measured 0.78x: small matmuls), Llama 1B 1.22 and 3B 1.27 (fp8
# won there); its median error on a single config is 5-7% on Llama
# (bench/results/throughput_loo_h200), so a ratio near 1 says nothing about which is faster.
FIRST_IF_FASTER = 1.15

# The expert's preference order for each knob (first allowed value wins).
EXPERT: dict[str, list[Any]] = {
    "precision": ["bf16", "fp16", "tf32", "fp32"],
    "attention": ["flash", "cudnn", "efficient", "flex", "math"],
    "compile_mode": ["default", "none"],
    # Each repeated block compiled once, with the output layer and its loss as a region of
    # their own (torchtitan's default): on three HF models on the H100 it ran 0.6-1.0% below a
    # whole-model compile and compiled in 18-35% of its time (bench/results/hf_knobs_h100), and
    # a whole-model compile's 30-130 s a trial is what kept a 10-minute study to three configs.
    "compile_scope": ["block", "model"],
    "kernels": ["none", "cce", "fused-ce", "liger"],  # cce: faster than fused-ce where both ran
    "checkpointing": ["none", "selective", "full"],
    "optimizer": ["adamw-fused", "adamw-foreach"],
    "vocab_pad_multiple": [64, 128, 1],
    # The default allocator is what a run gets unless someone sets PYTORCH_CUDA_ALLOC_CONF.
    "allocator": ["default", "expandable"],
    "nccl_algo": ["default"],
    "nccl_proto": ["default"],
    "grad_compression": ["none"],
    # Several GPUs: DDP first (the common default; FSDP2 pays off when states do not fit).
    "parallel": ["ddp", "fsdp2", "fsdp2-no-reshard"],
    "ddp_grad_as_bucket_view": [False, True],
    "ddp_static_graph": [False, True],
    "fsdp_reduce_dtype": ["fp32", "bf16"],
}
# The fused attention kernels, in the expert's order (math materialises the scores: never a seed's).
FUSED_ATTENTION = [k for k in EXPERT["attention"] if k != "math"]


@dataclass
class SeedPlan:
    """The seeds to run first (`now`), and those that wait until the throughput model has no
    proposal worth a trial (`later`), both in order."""

    now: list[dict[str, Any]]
    later: list[dict[str, Any]] = field(default_factory=list)
    # The expert default's params (one of `now`), None where options.expert_seed is off: its
    # trials are marked so (Purpose.EXPERT_DEFAULT), whatever their number.
    expert: dict[str, Any] | None = None

    @property
    def all(self) -> list[dict[str, Any]]:
        return self.now + self.later

    def replaced(self, seed: dict[str, Any], by: dict[str, Any]) -> SeedPlan:
        """The plan with `by` in `seed`'s place (a pruned seed's twin runs instead of it)."""
        key = canonical_params(seed)

        def swap(p: dict[str, Any]) -> dict[str, Any]:
            return by if canonical_params(p) == key else p

        expert = None if self.expert is None else swap(self.expert)
        return SeedPlan([swap(p) for p in self.now], [swap(p) for p in self.later], expert)


class Seeder:
    """The seeds of one study, judged by the study's screen (rules and cost model)."""

    def __init__(
        self,
        context: SearchContext,
        *,
        limit_gib: float | None,
        screen: Screen,
        predicted_speed: Callable[[Knobs], float] | None = None,
    ) -> None:
        c = context
        self.space, self.model, self.target, self.gpus = c.space, c.model, c.target, c.gpus
        self.options, self.cost, self.limit_gib, self.screen = c.options, c.cost, limit_gib, screen
        self.predicted_speed = predicted_speed

    def knobs(self, params: dict[str, Any]) -> Knobs:
        return self.space.knobs_for(params, self.model, self.gpus)

    def seeds(self, db: Database) -> list[dict[str, Any]]:
        """Every seed, in order: the expert default, earlier winners on this GPU, then the
        expert's closest alternatives (the other fused attention kernel, another compile mode,
        another precision): the local search an engineer would do by hand."""
        return self.plan(db).all

    def plan(self, db: Database, *, timed: bool = False) -> SeedPlan:
        """The seeds split into those run first and those that yield to the throughput model
        (the module docstring says why; options.seeds_yield off: every one first). `timed`:
        the study has a time budget, and the expert default runs first (`_clearly_faster`)."""
        first: list[dict[str, Any]] = []
        expert = self.expert_params() if self.options.expert_seed else None
        if expert is not None:
            # First, unless the prior expects another precision clearly faster (below). Its
            # trials are marked as the expert default (SeedPlan.expert), which is how the
            # recommendation finds its yardstick, whatever their number.
            first.append(expert)
        if self.options.history_seeds > 0:
            first.extend(self._history(db))
        alternatives: list[dict[str, Any]] = []
        if expert is not None and self.options.neighbour_seeds:
            alternatives = self._fastest_first(self._neighbours(expert))
        # Where the expert default may not fit with the headroom kept (Llama 8B on one H200),
        # the alternatives that make room (the expandable allocator, 8-bit AdamW moments) may
        # be the only configs the study can recommend: they run up front.
        needs_room = expert is not None and not self.expert_fits(expert)
        if needs_room:
            # The expert's own config under the allocator that strands less runs first: its
            # numerics and its speed. The 8-bit moments keep their place by predicted speed
            # (on Llama 8B they are slower), but run up front too.
            same = [a for a in alternatives if _allocator_only(a, expert)]
            alternatives = same + [a for a in alternatives if a not in same]
        if (
            expert is not None
            and not needs_room
            and not timed
            and alternatives
            and self._clearly_faster(alternatives[0], expert)
        ):
            first.insert(0, alternatives[0])
        later: list[dict[str, Any]] = []
        for i, alt in enumerate(alternatives):
            other_precision = alt.get("precision") != expert.get("precision") if expert else False
            makes_room = needs_room and (
                _allocator_only(alt, expert) or alt.get("optimizer") == Optimizer.ADAMW_8BIT.value
            )
            up_front = i == 0 or other_precision or makes_room or not self.options.seeds_yield
            (first if up_front else later).append(alt)
        now = _unique(first)
        return SeedPlan(now, _unique(later, taken=now), expert=expert)

    def expert_params(self) -> dict[str, Any]:
        """bf16, a fused attention kernel, compile default, and the largest micro-batch that the
        cost model says fits; the space's `defaults` win over these choices. Where no
        micro-batch fits without checkpointing, the next checkpointing the expert would turn
        on that lets one fit; where none fits for sure (Llama 8B on one H200: the weights,
        AdamW's moments and the gradients alone are 16 B/param), the config predicted to need
        the least, the largest micro-batch among those that need about as little."""
        params = self._expert_choices()
        if "micro_batch_size" not in self.space.knobs or "micro_batch_size" in params:
            return params
        fallbacks = [{**params, **c} for c in self._checkpointing_fallbacks(params)]
        for tried in fallbacks:
            mb = self._largest_fitting_mb(tried)
            if mb is not None:
                return {**tried, "micro_batch_size": mb}
        return self._least_need(fallbacks)

    def _least_need(self, candidates: list[dict[str, Any]]) -> dict[str, Any]:
        """Of `candidates` at each micro-batch, the one predicted to need the least memory;
        where the optimizer step's peak sets the need, a larger micro-batch needs no more, so
        among needs within LEAST_NEED_TIE of the least, the largest micro-batch (the expert's
        own order of checkpointing first)."""
        options = [{**p, "micro_batch_size": mb} for p in candidates for mb in self._sizes(p)] or [
            {**p, "micro_batch_size": sorted_sizes(self.space)[0]} for p in candidates
        ]
        needs = [(self.cost.predict(self.knobs(p)).need_gib, p) for p in options]
        least = min(need for need, _ in needs)
        close = [p for need, p in needs if need <= least * (1 + LEAST_NEED_TIE)]
        return max(close, key=lambda p: p["micro_batch_size"])

    def expert_fits(self, params: dict[str, Any]) -> bool:
        """Whether the cost model is confident the expert default (`expert_params()`) fits
        with the headroom kept (no memory to fill, as on a CPU: it does)."""
        return "micro_batch_size" not in params or bool(
            self._fits(params, [params["micro_batch_size"]])
        )

    def _checkpointing_fallbacks(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The expert's choice first, then (unless the space's defaults fix it) the other
        checkpointing values in the expert's order: each recomputes more to keep less."""
        out: list[dict[str, Any]] = [{}]
        domain = self.space.knobs.get("checkpointing")
        if domain is None or "checkpointing" in self.space.defaults or isinstance(domain, IntRange):
            return out
        order = EXPERT["checkpointing"]
        current = params.get("checkpointing")
        later = order[order.index(current) + 1 :] if current in order else []
        for value in later:
            alt = {**params, "checkpointing": value}
            if in_domain(domain, value) and self._allowed(alt):
                out.append({"checkpointing": value})
        return out

    def _expert_choices(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        domains = self.space.knobs
        for name, domain in domains.items():
            if name == "micro_batch_size" and name not in self.space.defaults:
                continue
            params[name] = self.space.defaults.get(name, first_value(domain))
            if name in self.space.defaults and (self._allowed(params) or name not in EXPERT):
                continue  # a default wins where the rules let it run (not flash for Gemma 2)
            if name not in EXPERT or isinstance(domain, IntRange):
                continue
            allowed = [v for v in EXPERT[name] if in_domain(domain, v)]
            for value in allowed:
                params[name] = value
                if self._allowed(params):
                    break
        return params

    def _neighbours(self, expert: dict[str, Any]) -> list[dict[str, Any]]:
        # `defaults` say where to start, not what to leave unexplored: the neighbours vary
        # those knobs too. Prefer cheap compiles (max-autotune can take minutes to compile).
        # Where only the expandable allocator lets the expert default fit, it is one of them,
        # and the others start from it: they keep about the expert's memory (on Llama 8B an
        # fp8 seed with the default allocator is as tight as the expert default).
        out = []
        roomy = self._expandable(expert)
        if roomy is not None:
            out.append(roomy)
            expert = roomy
        # No larger micro-batch among them: whether one has room is known once a trial's peak
        # is measured, and then for whichever config leads (search/micro_batch_up.py).
        domains = self.space.knobs
        prefs = {
            "attention": ["cudnn", "flash", "flex", "efficient"],
            "compile_mode": ["reduce-overhead", "default"],
            # Every precision class the hardware supports gets a seed: fp8 loses on small
            # matmuls (GPT-2 124M: 0.78x) but won 1.17x on Llama 1B under compile (H200,
            # bench/results/fp8_compile_h200.md), which a bf16-only start never measured.
            "precision": ["fp8-tensorwise", "fp8-rowwise"],
        }
        for name, values in prefs.items():
            domain = domains.get(name)
            if domain is None or isinstance(domain, IntRange):
                continue
            for value in values:
                alt = {**expert, name: value}
                if value != expert[name] and in_domain(domain, value) and self._allowed(alt):
                    out.append(self._fastest_kernel(alt) if name == "precision" else alt)
                    break
        small_state = self._small_state(expert)
        if small_state is not None:
            out.append(small_state)
        if roomy is None:
            return out
        return [roomy, *(self._default_allocator_if_it_fits(a) for a in out[1:])]

    def _default_allocator_if_it_fits(self, alt: dict[str, Any]) -> dict[str, Any]:
        """`alt` as the screen would run it: where it calls the expandable twin dominated
        (screen.py `_allocator_twin`, the cost model sure the default allocator keeps the
        headroom), the default twin it names; otherwise the seed would be pruned, not run (the
        8-bit seed of Llama 8B, at 101 ± 15 GiB of 126 usable)."""
        prune = self.screen(alt, self.knobs(alt))
        instead = getattr(prune, "instead", None)
        return dict(instead) if instead is not None else alt

    def _expandable(self, expert: dict[str, Any]) -> dict[str, Any] | None:
        """Where the expert default may not fit with the headroom, the same config under the
        expandable-segments allocator, if the cost model's expected need then fits: the
        default allocator's reserved peak exceeded its allocated one by 3-16% on the H200
        (Llama 8B's expert default: 121.7 GiB allocated, 125.6 reserved, 9.7% free), memory
        that one environment variable may give back without touching the numerics."""
        domain = self.space.knobs.get("allocator")
        if domain is None or isinstance(domain, IntRange) or not in_domain(domain, "expandable"):
            return None
        if expert.get("allocator") != "default" or self.limit_gib is None:
            return None
        if self.expert_fits(expert):
            return None
        alt = {**expert, "allocator": "expandable"}
        if not self._allowed(alt):
            return None
        headroom = self.options.headroom if self.cost.on_cuda else 0.0
        usable = usable_gib(self.limit_gib, headroom)
        return alt if self.cost.predict(self.knobs(alt), usable).surely_fits(0.0) else None

    def _small_state(self, expert: dict[str, Any]) -> dict[str, Any] | None:
        """Where the expert default had to recompute to fit (or fits nowhere for sure), the
        8-bit AdamW that frees 6 B/param, with the least checkpointing that then fits and its
        largest micro-batch: what an engineer does when the optimizer state crowds out the
        activations (Llama 8B on one H200: 120 GiB of fp32 state, full checkpointing)."""
        domain = self.space.knobs.get("optimizer")
        value = Optimizer.ADAMW_8BIT.value
        if domain is None or isinstance(domain, IntRange) or not in_domain(domain, value):
            return None
        if "micro_batch_size" not in self.space.knobs or self.limit_gib is None:
            return None  # no memory to weigh: nothing says the state crowds anything out
        if expert.get("checkpointing", "none") == "none" and self.expert_fits(expert):
            return None
        small = {**expert, "optimizer": value}
        ckpt = self.space.knobs.get("checkpointing")
        if isinstance(ckpt, list) and "checkpointing" not in self.space.defaults:
            options = [{**small, "checkpointing": c} for c in EXPERT["checkpointing"] if c in ckpt]
        else:
            options = [small]
        for tried in options:
            if not self._allowed(tried):
                continue
            mb = self._largest_fitting_mb(tried)
            if mb is not None:
                return {**tried, "micro_batch_size": mb}
        return None

    def _fastest_kernel(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` with the fused attention kernel the throughput model's prior expects
        fastest (the expert's own kernel where none is expected faster). A precision seed
        may be the only trial its precision gets in a short study: in a 10-minute Llama 3B
        study on the H200 the fp8 seed, with the expert's flash, was the second and last
        search trial (31,777 tok/s), while fp8 with cuDNN, which the Hopper prior expects
        faster and which needs the same memory and compile, runs 33,609
        (bench/results/h200_session_20261204f)."""
        domain = self.space.knobs.get("attention")
        if self.predicted_speed is None or domain is None or isinstance(domain, IntRange):
            return params
        speed = self.predicted_speed
        best, best_speed = params, speed(self.knobs(params))
        for kernel in FUSED_ATTENTION:
            alt = {**params, "attention": kernel}
            if not in_domain(domain, kernel) or not self._allowed(alt):
                continue
            alt_speed = speed(self.knobs(alt))
            if alt_speed > best_speed * (1 + KERNEL_TIE):
                best, best_speed = alt, alt_speed
        return best

    def _fastest_first(self, seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The alternatives, fastest predicted first (the throughput model's prior: nothing of
        this study is measured yet). Under a time budget the winner is then known early and
        the end checks it needs get their time: in a 10-minute Llama 3B study on the H200 the
        fp8 seed ran last, after three bf16 alternatives of 80 s each, won by 1.18x at
        8.4 min, and its numerics check did not fit (bench/results/h200_session_20261201)."""
        if self.predicted_speed is None:
            return seeds
        speed = self.predicted_speed
        return sorted(seeds, key=lambda p: -speed(self.knobs(p)))

    def _clearly_faster(self, alt: dict[str, Any], expert: dict[str, Any]) -> bool:
        """Whether `alt` is another precision (fp8) that the prior predicts FIRST_IF_FASTER or
        more times the expert default's speed: then it runs before it. Only a precision: its
        gain is the matmul rate, the prior's firmest term; a larger micro-batch's is per-step
        overhead, its weakest (a 4-layer test model's next micro-batch is predicted 1.2x and
        more, and the space's own `defaults` name the config a user expects to start from).
        Both run up front either way (the same trials, the same GPU-seconds in all); the study
        only knows its likely winner one trial sooner. Not where the expert may not fit: its
        measurement is what tells the memory model how tight the alternatives that make room
        are (Llama 8B). Nor under a time budget (`plan`'s
        `timed`), where the search may stop for the end checks after one trial: the expert
        default compiles fastest (bf16: 64-70 s on Llama 3B, fp8 157 s), its graph is the
        numerics reference's warm one, and it is the recommendation's yardstick. A replayed
        10-minute 3B study that ran fp8 first stopped its search after it (its reference then
        a cold compile, 2.6 min expected) and never measured the expert default."""
        if self.predicted_speed is None or alt.get("precision") == expert.get("precision"):
            return False
        speed = self.predicted_speed
        return speed(self.knobs(alt)) >= FIRST_IF_FASTER * speed(self.knobs(expert))

    def _allowed(self, partial: dict[str, Any]) -> bool:
        """Whether the knobs chosen so far (`partial`) can run: a built-in rule counts only
        where every knob it blames is chosen, as the rest stand at a placeholder (their first
        value). Judged on the whole placeholder config, Gemma 2's bf16 was refused for the
        placeholder flash attention (which cannot cap its attention logits), and every later
        knob then took its last value."""
        domains = self.space.knobs
        filled = {k: partial.get(k, first_value(d)) for k, d in domains.items()}
        if "micro_batch_size" in domains and "micro_batch_size" not in partial:
            filled["micro_batch_size"] = domain_values(domains["micro_batch_size"])[0]
        knobs = self.knobs(filled)
        decided = set(partial) | (set(Knobs.knob_names()) - set(domains))  # fixed: decided
        if decided_verdict(knobs, self.target, self.model, self.gpus, decided) is not None:
            return False
        return self.space.violated_rule(knobs) is None

    def _largest_fitting_mb(self, params: dict[str, Any]) -> int | None:
        """The largest micro-batch the cost model is confident fits with these knobs (None:
        none does); with no memory to fill (a CPU) the smallest, the cheapest to run."""
        sizes = self._sizes(params) or sorted_sizes(self.space)
        if self.limit_gib is None:
            return sizes[0]
        fitting = self._fits(params, sizes)
        return fitting[-1] if fitting else None

    def _sizes(self, params: dict[str, Any]) -> list[int]:
        """The space's micro-batches, ascending, that run the study's held global batch
        exactly with these knobs (all of them where it holds none)."""
        return [
            mb
            for mb in sorted_sizes(self.space)
            if self.space.global_batch_mismatch(
                self.knobs({**params, "micro_batch_size": mb}), self.model, self.gpus
            )
            is None
        ]

    def _fits(self, params: dict[str, Any], sizes: list[int]) -> list[int]:
        """Those of `sizes` that fit with the memory headroom kept (search/headroom.py): a
        tight default would never be recommended."""
        if self.limit_gib is None:
            return sizes
        headroom = self.options.headroom if self.cost.on_cuda else 0.0
        usable = usable_gib(self.limit_gib, headroom)
        return [
            mb
            for mb in sizes
            if self.cost.predict(
                self.knobs({**params, "micro_batch_size": mb}), usable
            ).surely_fits(Z_SEED)
        ]

    def _history(self, db: Database) -> list[dict[str, Any]]:
        """Earlier winners on this GPU and model family, mapped into this space."""
        found = earlier_winners(db, self.model, self.target, self.options.history_seeds)
        return [p for p in map(self._into_space, found) if p is not None]

    def _into_space(self, knobs: dict[str, Any]) -> dict[str, Any] | None:
        expert = self.expert_params()
        params = {}
        for name, domain in self.space.knobs.items():
            value = knobs.get(name)
            params[name] = value if value is not None and in_domain(domain, value) else expert[name]
        try:
            k = self.knobs(params)
        except ValueError:
            return None
        return None if self.screen(params, k) is not None else params


def _allocator_only(alt: dict[str, Any], expert: dict[str, Any] | None) -> bool:
    """`alt` is the expert default under another allocator, and nothing else."""
    if expert is None or alt.get("allocator") == expert.get("allocator"):
        return False
    return {k: v for k, v in alt.items() if k != "allocator"} == {
        k: v for k, v in expert.items() if k != "allocator"
    }


def _unique(
    params: list[dict[str, Any]], taken: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """`params` in order without repeats, nor any already in `taken`."""
    seen = {canonical_params(p) for p in taken or []}
    out = []
    for p in params:
        key = canonical_params(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out

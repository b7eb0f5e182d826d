"""Reading a knob's domain in a search space: a list of values or an IntRange, asked the same way
(its values, its first value, whether it holds a value), wherever a seed or a check needs to."""

from __future__ import annotations

from typing import Any

from autotuner.search.space import IntRange, SearchSpace


def sorted_sizes(space: SearchSpace) -> list[int]:
    """The space's micro-batch sizes, smallest first."""
    return sorted(domain_values(space.knobs["micro_batch_size"]))


def domain_values(domain: list[Any] | IntRange) -> list[Any]:
    if isinstance(domain, IntRange):
        vals = [domain.low]
        v = 1
        while v <= domain.high:
            if v > domain.low:
                vals.append(v)
            v *= 2
        if domain.high not in vals:
            vals.append(domain.high)
        return [x for x in vals if (x - domain.low) % domain.step == 0 or domain.log]
    return [getattr(v, "value", v) for v in domain]


def first_value(domain: list[Any] | IntRange) -> Any:
    return domain.low if isinstance(domain, IntRange) else getattr(domain[0], "value", domain[0])


def in_domain(domain: list[Any] | IntRange, value: Any) -> bool:
    if isinstance(domain, IntRange):
        return isinstance(value, int) and domain.low <= value <= domain.high
    return str(getattr(value, "value", value)) in {str(getattr(d, "value", d)) for d in domain}

"""The recommendation's GPU clock: what the SM clock ran at while the winner was timed, and
whether the board held it down.

Under a power cap (NVML throttle reason `SwPowerCap`) the clock, and so tokens/s, follows the
power the work draws, which depends on the bits it switches: on the H200 every Llama trial ran
at the cap, and fp8 winners ran 1.6-3.3% faster after the numerics check's 50 training steps on
structured data than on the search trial's uniform random tokens
(bench/results/h200_session_20261204g/README.md). A user reading the number should know it was
measured at the cap, on synthetic tokens."""

from __future__ import annotations

from typing import Any

from autotuner.spec import Telemetry

POWER_REASONS = ("SwPowerCap", "HwPowerBrakeSlowdown")
THERMAL_REASONS = ("SwThermalSlowdown", "HwThermalSlowdown")


def gpu_clock_entry(telemetry: Telemetry | None) -> dict[str, Any] | None:
    """`{mean_mhz, max_mhz, power_w, capped_by, text}`, or None without NVML samples."""
    if telemetry is None or not telemetry.sm_clock_mean_mhz:
        return None
    mean, top = telemetry.sm_clock_mean_mhz, telemetry.sm_clock_max_mhz
    reasons = set(telemetry.throttle_reasons)
    power = [r for r in POWER_REASONS if r in reasons]
    thermal = [r for r in THERMAL_REASONS if r in reasons]
    text = f"{mean:,.0f} MHz mean" + (f" of {top:,.0f} max" if top else "")
    if power:
        watts = f"{telemetry.power_mean_w:,.0f} W, " if telemetry.power_mean_w else ""
        text += (
            f", held at the power cap ({watts}{', '.join(power)}): tokens/s then depends on "
            "the power the work draws, and real data on a learning model can draw less than "
            "these synthetic tokens"
        )
    if thermal:
        text += f"; thermally throttled ({', '.join(thermal)})"
    return {
        "mean_mhz": round(mean),
        "max_mhz": round(top) if top else None,
        "power_w": round(telemetry.power_mean_w) if telemetry.power_mean_w else None,
        "capped_by": power + thermal,
        "text": text,
    }

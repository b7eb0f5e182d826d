"""NVML telemetry sampled in a background thread during the measured repeats.

A clock far below its max, a power cap or a thermal slowdown explains an outlier, so each
trial carries what the GPU did while it was timed. No NVML, no GPU, or a metric the driver
does not expose (common in VMs): that value is None; telemetry never fails a trial.
"""

from __future__ import annotations

import os
import threading
import time

from autotuner.spec import Telemetry, TelemetrySeries

GIB = 1024**3


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver, no GPU: all mean "no telemetry"
        return None


def nvml_handle(nvml, torch_device_index: int = 0):
    """The NVML handle of a torch CUDA device (NVML ignores CUDA_VISIBLE_DEVICES: match UUIDs)."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch_device_index).uuid)
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        index = int(visible[torch_device_index]) if visible[0].strip().isdigit() else 0
        return nvml.nvmlDeviceGetHandleByIndex(index)


def _reason_names(nvml) -> dict[int, str]:
    names = {}
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        for attr in dir(nvml):
            if attr.startswith(prefix) and attr[len(prefix) :] not in ("All", "None"):
                names.setdefault(getattr(nvml, attr), attr[len(prefix) :])
    return names


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


class Sampler:
    """Use as a context manager around the measured repeats; `.result` is a Telemetry or None."""

    def __init__(self, hz: float, torch_device_index: int = 0):
        self.hz = hz
        self.result: Telemetry | None = None
        self._nvml = _nvml() if hz > 0 else None
        self._handle = None
        if self._nvml is not None:
            self._handle = _try(nvml_handle, self._nvml, torch_device_index)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: dict[str, list[float]] = {
            k: [] for k in ("sm", "mem", "power", "clock", "temp", "used")
        }
        self._reasons = 0
        # Every tick, aligned (None: not read at that tick), for the trial page's time series.
        self._ticks: list[tuple[float, dict[str, float | None]]] = []

    def _sample(self) -> None:
        nvml, h = self._nvml, self._handle
        tick: dict[str, float | None] = dict.fromkeys(self._samples)
        util = _try(nvml.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            self._samples["sm"].append(util.gpu)
            self._samples["mem"].append(util.memory)
            tick["sm"], tick["mem"] = util.gpu, util.memory
        for key, value in (
            ("power", _try(nvml.nvmlDeviceGetPowerUsage, h)),  # mW
            ("clock", _try(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)),
            ("temp", _try(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)),
        ):
            if value is not None:
                self._samples[key].append(value)
                tick[key] = value
        mem = _try(nvml.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            self._samples["used"].append(mem.used)
            tick["used"] = mem.used
        self._ticks.append((time.perf_counter() - self._t0, tick))
        get_reasons = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        reasons = _try(get_reasons, h)
        if reasons is not None:
            self._reasons |= reasons

    def _run(self) -> None:
        period = 1.0 / self.hz
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(period)

    def __enter__(self) -> Sampler:
        if self._handle is not None:
            self._energy0 = _try(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._run, name="nvml-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        nvml, h, s = self._nvml, self._handle, self._samples
        energy1 = _try(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        if self._energy0 is not None and energy1 is not None:
            energy_j = (energy1 - self._energy0) / 1000.0  # mJ counter
        elif s["power"]:  # no energy counter: integrate the mean power over the window
            energy_j = _mean(s["power"]) / 1000.0 * (time.perf_counter() - self._t0)
        else:
            energy_j = None
        names = _reason_names(nvml)
        self.result = Telemetry(
            samples=len(s["sm"]) or len(s["power"]) or len(s["clock"]),
            sm_util_mean_pct=_mean(s["sm"]),
            mem_util_mean_pct=_mean(s["mem"]),
            power_mean_w=None if not s["power"] else _mean(s["power"]) / 1000.0,
            energy_j=energy_j,
            sm_clock_mean_mhz=_mean(s["clock"]),
            sm_clock_max_mhz=_try(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
            temperature_max_c=max(s["temp"]) if s["temp"] else None,
            throttle_reasons=sorted(n for bit, n in names.items() if self._reasons & bit),
            nvml_used_gib=max(s["used"]) / GIB if s["used"] else None,
            series=_series(self._ticks),
        )


def idle_share(result: Telemetry | None) -> float | None:
    """The share of the measured repeats the GPU ran no kernel: 1 - NVML's mean utilisation
    ("percent of time over the sample period during which a kernel was executing"); None
    without NVML samples (a CPU trial, a VM that hides the counter)."""
    if result is None or result.sm_util_mean_pct is None:
        return None
    return min(1.0, max(0.0, 1.0 - result.sm_util_mean_pct / 100.0))


MAX_SERIES_POINTS = 600  # enough for a chart; a 10 Hz sampler over a long trial is thinned


def _series(ticks: list[tuple[float, dict[str, float | None]]]) -> TelemetrySeries | None:
    """The ticks as aligned lists in the units the summary uses (W, MHz, GiB), every k-th
    tick kept beyond MAX_SERIES_POINTS; a metric never read stays an empty list."""
    if not ticks:
        return None
    step = -(-len(ticks) // MAX_SERIES_POINTS)
    kept = ticks[::step]

    def column(key: str, scale: float = 1.0) -> list[float | None]:
        values = [tick[key] for _, tick in kept]
        if all(v is None for v in values):
            return []
        return [None if v is None else round(v * scale, 3) for v in values]

    return TelemetrySeries(
        t_s=[round(t, 3) for t, _ in kept],
        sm_util_pct=column("sm"),
        mem_util_pct=column("mem"),
        power_w=column("power", 1e-3),  # NVML reports mW
        sm_clock_mhz=column("clock"),
        temperature_c=column("temp"),
        mem_used_gib=column("used", 1.0 / GIB),
    )

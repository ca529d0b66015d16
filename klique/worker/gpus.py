"""The host's GPUs through NVML (nvidia-ml-py), when the library and a driver are there."""

import logging
from dataclasses import dataclass

log = logging.getLogger("klique.worker")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mb: int


class Nvml:
    """NVML, opened once. ``Nvml.open()`` is None where there is no NVML, and nothing fails."""

    def __init__(self, pynvml):
        self._nvml = pynvml

    @classmethod
    def open(cls) -> "Nvml | None":
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            log.info("no NVML on this host", extra={"fields": {"error": str(error)}})
            return None
        return cls(pynvml)

    def gpus(self) -> list[Gpu]:
        nvml, found = self._nvml, []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                Gpu(
                    index,
                    _text(nvml.nvmlDeviceGetUUID(handle)),
                    _text(nvml.nvmlDeviceGetName(handle)),
                    memory.total >> 20,
                )
            )
        return found

    def stats(self) -> list[dict]:
        """Per GPU: utilisation, memory and temperature, for the heartbeat; [] when NVML fails."""
        nvml, stats = self._nvml, []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                stats.append(
                    {
                        "index": index,
                        "utilization_pct": nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                        "memory_used_mb": memory.used >> 20,
                        "memory_total_mb": memory.total >> 20,
                        "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
                    }
                )
        except nvml.NVMLError as error:
            log.warning("NVML stats failed", extra={"fields": {"error": str(error)}})
            return []
        return stats


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

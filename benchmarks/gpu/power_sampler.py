"""The GPU's power draw and SM clock, sampled by nvidia-smi in the
background, read back for windows of host time.

    with PowerSampler(csv_path) as sampler:
        start = time.time(); ...; end = time.time()
    sampler.window(start, end)  # {"samples", "median_w", "median_sm_mhz", ...}

nvidia-smi prints one CSV line per interval (--loop-ms) with its own
timestamp (local time); the windows are host time.time() values, so the two
share the host's clock. Where nvidia-smi is missing or fails, windows come
back empty ({"samples": 0}) and the benchmark runs on without power figures.
"""
import datetime
import shutil
import statistics
import subprocess

QUERY = ("timestamp,power.draw,clocks.sm,temperature.gpu,"
         "clocks_event_reasons.active")
# clocks_event_reasons.active: the software power cap.
SW_POWER_CAP = 0x4


def _number(field):
    """'681.20 W' -> 681.2; '1395 MHz' -> 1395.0; None if not a number."""
    try:
        return float(field.strip().split()[0])
    except (ValueError, IndexError):
        return None


def parse_line(line):
    """One nvidia-smi CSV line -> (unix time, watts, MHz, deg C, reasons),
    or None for the header and anything unreadable."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 5:
        return None
    try:
        when = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f")
        reasons = int(fields[4], 16)
    except ValueError:
        return None
    watts, mhz, celsius = (_number(f) for f in fields[1:4])
    if watts is None or mhz is None:
        return None
    return when.timestamp(), watts, mhz, celsius, reasons


class PowerSampler:
    def __init__(self, csv_path, interval_ms=50):
        self.csv_path = csv_path
        self.interval_ms = interval_ms
        self.process = None
        self.samples = []

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self.file = open(self.csv_path, "w")
            self.process = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv",
                 "-lms", str(self.interval_ms)],
                stdout=self.file, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        if self.process:
            self.process.terminate()
            self.process.wait()
            self.file.close()
            with open(self.csv_path) as f:
                self.samples = [s for s in map(parse_line, f) if s]
        return False

    def window(self, start, end):
        """Medians over the samples taken between host times start and
        end, and the share that reported the software power cap."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if not inside:
            return {"samples": 0}
        return {"samples": len(inside),
                "median_w": statistics.median(s[1] for s in inside),
                "median_sm_mhz": statistics.median(s[2] for s in inside),
                "max_temp_c": max(s[3] or 0 for s in inside),
                "power_capped_share": sum(
                    1 for s in inside if s[4] & SW_POWER_CAP) / len(inside)}

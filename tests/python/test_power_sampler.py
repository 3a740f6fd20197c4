"""benchmarks/gpu/power_sampler.py without a GPU: nvidia-smi's CSV lines
are read back, windows of host time get medians and the power-capped
share, and a machine without nvidia-smi yields empty windows."""
import datetime
import os
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"
                       / "gpu"))
import power_sampler  # noqa: E402


def line(when, watts, mhz, celsius, reasons):
    stamp = when.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {watts:.2f} W, {mhz} MHz, {celsius}, 0x{reasons:016x}"


class PowerSamplerTest(unittest.TestCase):
    def test_reads_lines_and_skips_the_header(self):
        when = datetime.datetime(2026, 11, 27, 3, 0, 0, 250000)
        sample = power_sampler.parse_line(line(when, 681.2, 1395, 61, 0x4))
        self.assertEqual(sample, (when.timestamp(), 681.2, 1395.0, 61.0, 4))
        header = ("timestamp, power.draw [W], clocks.current.sm [MHz], "
                  "temperature.gpu, clocks_event_reasons.active")
        self.assertIsNone(power_sampler.parse_line(header))
        self.assertIsNone(power_sampler.parse_line("garbage"))
        self.assertIsNone(power_sampler.parse_line(
            line(when, 1, 2, 3, 0).replace("1.00 W", "[N/A]")))

    def test_window_medians_and_capped_share(self):
        sampler = power_sampler.PowerSampler("/dev/null")
        sampler.samples = [(10.0, 100.0, 1980.0, 40.0, 0),
                           (11.0, 690.0, 1400.0, 60.0, 0x4),
                           (12.0, 700.0, 1300.0, 62.0, 0x4),
                           (13.0, 500.0, 1700.0, 61.0, 0),
                           (20.0, 100.0, 1980.0, 50.0, 0)]
        window = sampler.window(10.5, 13.5)
        self.assertEqual(window["samples"], 3)
        self.assertEqual(window["median_w"], 690.0)
        self.assertEqual(window["median_sm_mhz"], 1400.0)
        self.assertEqual(window["max_temp_c"], 62.0)
        self.assertAlmostEqual(window["power_capped_share"], 2 / 3)
        self.assertEqual(sampler.window(14.0, 19.0), {"samples": 0})

    def test_no_nvidia_smi_gives_empty_windows(self):
        with tempfile.TemporaryDirectory() as folder, \
                mock.patch.dict(os.environ, {"PATH": folder}):
            with power_sampler.PowerSampler(
                    os.path.join(folder, "power.csv")) as sampler:
                pass
        self.assertEqual(sampler.samples, [])
        self.assertEqual(sampler.window(0, 1e12), {"samples": 0})


if __name__ == "__main__":
    unittest.main()

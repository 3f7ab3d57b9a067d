import unittest

from timefmt import parse_duration


class TestParseDurationHidden(unittest.TestCase):
    def test_minutes(self):
        self.assertEqual(parse_duration("2m"), 120)

    def test_all_units(self):
        self.assertEqual(parse_duration("1h1m1s"), 3661)

    def test_hours(self):
        self.assertEqual(parse_duration("3h"), 10800)

    def test_case_and_space(self):
        self.assertEqual(parse_duration(" 10M "), 600)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            parse_duration("ten minutes")

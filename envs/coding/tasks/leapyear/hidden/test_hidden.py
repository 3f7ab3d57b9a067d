import unittest

from calkit import days_in_year, is_leap_year


class TestYearsHidden(unittest.TestCase):
    def test_1600_2400(self):
        self.assertTrue(is_leap_year(1600))
        self.assertTrue(is_leap_year(2400))

    def test_centuries(self):
        for y in (1700, 1800, 2100, 2200, 2300):
            self.assertFalse(is_leap_year(y), y)

    def test_days(self):
        self.assertEqual(days_in_year(2100), 365)
        self.assertEqual(days_in_year(2024), 366)
        self.assertEqual(days_in_year(1600), 366)

    def test_ordinary(self):
        self.assertFalse(is_leap_year(2019))
        self.assertTrue(is_leap_year(1996))

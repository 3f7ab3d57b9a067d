import unittest

from calkit import days_in_year, is_leap_year


class TestYears(unittest.TestCase):
    def test_ordinary(self):
        self.assertFalse(is_leap_year(2023))
        self.assertTrue(is_leap_year(2024))

    def test_century(self):
        self.assertFalse(is_leap_year(1900))

    def test_four_hundred(self):
        self.assertTrue(is_leap_year(2000))
        self.assertEqual(days_in_year(2000), 366)


if __name__ == "__main__":
    unittest.main()

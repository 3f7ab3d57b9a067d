import unittest

from numerals import roman_to_int


class TestRomanHidden(unittest.TestCase):
    def test_years(self):
        self.assertEqual(roman_to_int("MCMXCIV"), 1994)
        self.assertEqual(roman_to_int("MMXXIV"), 2024)

    def test_small(self):
        self.assertEqual(roman_to_int("IX"), 9)
        self.assertEqual(roman_to_int("XL"), 40)
        self.assertEqual(roman_to_int("CD"), 400)

    def test_lowercase(self):
        self.assertEqual(roman_to_int("xiv"), 14)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            roman_to_int("ABC")

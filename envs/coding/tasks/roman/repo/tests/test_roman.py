import unittest

from numerals import roman_to_int


class TestRoman(unittest.TestCase):
    def test_additive(self):
        self.assertEqual(roman_to_int("VIII"), 8)

    def test_subtractive(self):
        self.assertEqual(roman_to_int("IV"), 4)
        self.assertEqual(roman_to_int("XC"), 90)


if __name__ == "__main__":
    unittest.main()

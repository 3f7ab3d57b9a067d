import unittest

from stats import median


class TestMedianHidden(unittest.TestCase):
    def test_unsorted_even(self):
        self.assertEqual(median([10, 2, 8, 4]), 6)

    def test_two(self):
        self.assertEqual(median([1, 2]), 1.5)

    def test_single(self):
        self.assertEqual(median([7]), 7)

    def test_odd_unsorted(self):
        self.assertEqual(median([5, 1, 9, 3, 7]), 5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])

    def test_generator(self):
        self.assertEqual(median(x for x in [4, 1, 3, 2]), 2.5)

import unittest

from spans import merge


class TestMergeHidden(unittest.TestCase):
    def test_unsorted_chain(self):
        self.assertEqual(merge([(5, 6), (1, 2), (2, 5)]), [(1, 6)])

    def test_disjoint(self):
        self.assertEqual(merge([(1, 2), (3, 4)]), [(1, 2), (3, 4)])

    def test_contained(self):
        self.assertEqual(merge([(1, 10), (2, 3), (10, 11)]), [(1, 11)])

    def test_empty(self):
        self.assertEqual(merge([]), [])

    def test_points(self):
        self.assertEqual(merge([(2, 2), (2, 2), (1, 2)]), [(1, 2)])

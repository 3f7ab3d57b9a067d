import unittest

from iterkit import chunked


class TestChunkedHidden(unittest.TestCase):
    def test_size_larger_than_input(self):
        self.assertEqual(chunked([1, 2], 5), [[1, 2]])

    def test_empty(self):
        self.assertEqual(chunked([], 3), [])

    def test_size_one(self):
        self.assertEqual(chunked("abc", 1), [["a"], ["b"], ["c"]])

    def test_generator(self):
        self.assertEqual(chunked(range(7), 3), [[0, 1, 2], [3, 4, 5], [6]])

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            chunked([1], 0)

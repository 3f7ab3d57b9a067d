import unittest

from spans import merge


class TestMerge(unittest.TestCase):
    def test_overlap(self):
        self.assertEqual(merge([(1, 4), (2, 5)]), [(1, 5)])

    def test_touching(self):
        self.assertEqual(merge([(1, 2), (2, 3)]), [(1, 3)])


if __name__ == "__main__":
    unittest.main()

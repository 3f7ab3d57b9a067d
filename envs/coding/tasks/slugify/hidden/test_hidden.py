import unittest

from textkit import slugify


class TestSlugifyHidden(unittest.TestCase):
    def test_many_separators(self):
        self.assertEqual(slugify("a -- b __ c"), "a-b-c")

    def test_edges(self):
        self.assertEqual(slugify("  --Leading and trailing!!  "), "leading-and-trailing")

    def test_digits(self):
        self.assertEqual(slugify("Release 2.0, final"), "release-2-0-final")

    def test_only_separators(self):
        self.assertEqual(slugify("!!!"), "")

    def test_already_slug(self):
        self.assertEqual(slugify("already-a-slug"), "already-a-slug")

"""Readers and writers of other tools' formats: each subpackage turns one outside format into Workbench's
own objects (an environment folder, tasks, rubrics) and back."""

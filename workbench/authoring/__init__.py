"""The public authoring API: environments, tasks, rubrics, harnesses, tools and sandbox runtimes, and finding environments."""

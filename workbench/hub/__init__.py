"""Sharing environments through any Python package index: ``workbench hub push|pull|search|versions|show|fork|remove``.

A published environment is a wheel (the bundle of ``workbench package``, versioned, with its eval card) on an
index that speaks the standard simple and upload APIs (pypiserver, devpi, Artifactory, GitLab, CodeArtifact).
"""

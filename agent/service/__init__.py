"""The daemon: following targets, watching files, sd_notify, install-service.

Imports output and below only: no tools, no command line.
"""

"""Files on disk: atomic files and folders, checkpoint folders."""

"""The test suite of ``backends`` (a package so spawned worker processes can import ``tests._helpers``)."""

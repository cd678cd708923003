pytest_plugins = ["tests.substrate.fixtures"]

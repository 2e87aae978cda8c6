"""Every test sees the simulated board plugged into the role factories, as commands do
through `profiler.platform.choose_board`: many tests load it with
`profiler.boards.profiles.load_board("sim")` and hand it to the factories directly."""

import profiler.sim.platform  # noqa: F401 - registers the sim's governor, executor, sources

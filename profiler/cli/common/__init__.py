"""What several commands share: argument options, the plumbing from parsed arguments to
library objects, and progress display. No command owns it."""

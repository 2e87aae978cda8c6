"""Several devices running one model over MPI: devices files, device mappings, links."""

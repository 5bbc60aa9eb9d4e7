"""One module per command or command group; each stays thin over the pipeline's packages."""

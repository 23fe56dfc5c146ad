"""TF Serving files: models.config template, the TF Text op set it links, example clients."""

"""The faulty catalog: the reference server with one requirement broken, to prove that the harness notices."""

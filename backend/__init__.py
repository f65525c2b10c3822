"""The bundled instrumented inference backend (torch): model, engine, generation, kernels, server."""

"""The bundled suite: tasks written for cudagym, each with a reference solution."""

/* Found only through the RUNPATH of the library that dlopens it (runpath_caller.c). */
int kjit_test_runpath_target(void) { return 42; }

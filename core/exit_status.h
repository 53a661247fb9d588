/* Exit statuses shared by the role programs and the launchers that supervise them. */
#ifndef CPT_CORE_EXIT_STATUS_H
#define CPT_CORE_EXIT_STATUS_H

/* Stopped on request after saving its state (a checkpoint): resume it; not a failure, not finished. */
#define CPT_EXIT_STOPPED 3
/* Failed in a way a restart cannot fix (e.g. the checkpoints folder is not writable): never restarted. */
#define CPT_EXIT_NO_RESTART 4
/* A test that cannot run here (ctest SKIP_RETURN_CODE, tests/CMakeLists.txt). */
#define CPT_EXIT_SKIP 77

#endif

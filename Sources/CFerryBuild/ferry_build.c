#include "ferry_build.h"

// Package.swift defines FERRY_COMMIT for this file only, so a new commit recompiles
// this file and relinks, nothing else.
#ifndef FERRY_COMMIT
#define FERRY_COMMIT ""
#endif

const char *ferry_build_commit(void) { return FERRY_COMMIT; }

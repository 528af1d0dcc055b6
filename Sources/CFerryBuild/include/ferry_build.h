#ifndef FERRY_BUILD_H
#define FERRY_BUILD_H

/// The commit this binary was built from (`git rev-parse --short=12 HEAD`, with
/// `-modified` when the tree had uncommitted changes), or "" when the build was not
/// told (Package.swift reads FERRY_COMMIT, which the Makefile sets).
const char *ferry_build_commit(void);

#endif

#pragma once
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro of a cast Swift does not import: bound text and blobs are
// copied by SQLite before the call returns.
static inline sqlite3_destructor_type csqlite_transient(void) { return SQLITE_TRANSIENT; }

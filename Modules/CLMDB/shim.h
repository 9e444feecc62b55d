// The system's liblmdb (OpenLDAP's Lightning Memory-Mapped Database), for StoreLMDB.
// Debian/Ubuntu: apt-get install liblmdb-dev; macOS: brew install lmdb.
#ifndef FERRY_CLMDB_SHIM_H
#define FERRY_CLMDB_SHIM_H

#include <lmdb.h>

#endif

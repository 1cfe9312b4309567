#pragma once
// Reads /proc/locks: the POSIX advisory locks a process holds on a file. SQLite keeps a SHARED lock on a WAL
// database file for as long as a connection is open; a process that lost it (by closing some other descriptor
// of the file) lets another process delete the WAL under its connections. Tests use this to check that every
// process sharing a workspace keeps its locks.
#include <sys/stat.h>
#include <sys/types.h>

#include <fstream>
#include <sstream>
#include <string>

namespace mismatch::test {

// Number of POSIX lock ranges `pid` holds on the file at `path` (0 when none, -1 when the file or /proc/locks
// cannot be read). Matched by inode number: /proc/locks names a file as MAJOR:MINOR:INODE.
inline int posixLocksHeld(pid_t pid, const std::string& path)
{
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) {
        return -1;
    }
    std::ifstream locks("/proc/locks");  // not the database: closing this descriptor releases nothing
    if (!locks) {
        return -1;
    }
    const std::string inodeSuffix = ":" + std::to_string(static_cast<unsigned long long>(status.st_ino));
    int count = 0;
    std::string line;
    while (std::getline(locks, line)) {
        // "1: POSIX  ADVISORY  READ 12345 08:01:1234567 1073741826 1073742335" ("->" marks a blocked waiter)
        std::istringstream fields(line);
        std::string index, type, mode, access, pidText, file;
        fields >> index >> type;
        if (type == "->") {
            continue;
        }
        fields >> mode >> access >> pidText >> file;
        if (type != "POSIX" || pidText != std::to_string(pid)) {
            continue;
        }
        if (file.size() > inodeSuffix.size() &&
            file.compare(file.size() - inodeSuffix.size(), inodeSuffix.size(), inodeSuffix) == 0) {
            ++count;
        }
    }
    return count;
}

}  // namespace mismatch::test

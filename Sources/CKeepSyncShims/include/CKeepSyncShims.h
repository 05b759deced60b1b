#ifndef CKEEPSYNC_SHIMS_H
#define CKEEPSYNC_SHIMS_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>

/* The fields keepsync reads from statx, flattened. */
struct ks_stat {
    uint32_t mode;
    uint64_t size;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    int64_t ctime_sec;
    uint32_t ctime_nsec;
    uint64_t dev;
    uint64_t ino;
    int64_t btime_sec;
    uint32_t btime_nsec;
    int has_btime;
    uint32_t nlink;
};

/* statx of dirfd/path without following a final symlink; path "" with fd for fstat. */
int ks_statx(int dirfd, const char *path, int empty_path, struct ks_stat *out);

/* Thin wrappers for calls and constants Glibc's Swift overlay hides. No logic. */

ssize_t ks_copy_file_range(int fd_in, int fd_out, size_t len);
int ks_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve);
int ks_syncfs(int fd);
/// renameat2(2); flags such as ks_rename_exchange().
int ks_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
int ks_ficlone(int dest_fd, int src_fd);
int ks_getversion(int fd, uint64_t *out);
/// mkostemp(template, O_CLOEXEC): close-on-exec from the start.
int ks_mkstemp_cloexec(char *template_);
/// pipe2(fds, O_CLOEXEC).
int ks_pipe_cloexec(int fds[2]);
/// fstatfs's f_type.
int ks_fs_type(int fd, int64_t *out);
int ks_flock(int fd, int op);
/// getdents64(2): raw linux_dirent64 records into buf; 0 at the end.
ssize_t ks_getdents64(int fd, void *buf, size_t len);
int ks_mallopt_arena_max(int n);
/// malloc_trim(0): freed heap pages go back to the system.
int ks_malloc_trim(void);

uint64_t ks_resolve_beneath(void);
uint64_t ks_resolve_no_symlinks(void);
int ks_o_directory(void);
int ks_o_nofollow(void);
long ks_utime_omit(void);
int ks_at_symlink_nofollow(void);
int ks_at_removedir(void);
unsigned int ks_rename_exchange(void);
unsigned int ks_rename_noreplace(void);
int ks_lock_ex_nb(void);

#endif

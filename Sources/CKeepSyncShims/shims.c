#include "CKeepSyncShims.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

ssize_t ks_copy_file_range(int fd_in, int fd_out, size_t len) {
    return copy_file_range(fd_in, NULL, fd_out, NULL, len, 0);
}

int ks_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = flags;
    how.mode = mode;
    how.resolve = resolve;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

int ks_syncfs(int fd) { return syncfs(fd); }
int ks_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}
int ks_ficlone(int dest_fd, int src_fd) { return ioctl(dest_fd, FICLONE, src_fd); }

int ks_fs_type(int fd, int64_t *out) {
    struct statfs st;
    int r = fstatfs(fd, &st);
    if (r == 0) *out = (int64_t)st.f_type;
    return r;
}

ssize_t ks_getdents64(int fd, void *buf, size_t len) {
    return syscall(SYS_getdents64, fd, buf, len);
}

int ks_getversion(int fd, uint64_t *out) {
    int v = 0;
    int r = ioctl(fd, FS_IOC_GETVERSION, &v);
    if (r == 0) *out = (uint64_t)(unsigned int)v;
    return r;
}

int ks_statx(int dirfd, const char *path, int empty_path, struct ks_stat *out) {
    struct statx sx;
    int flags = AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT | (empty_path ? AT_EMPTY_PATH : 0);
    int r = statx(dirfd, path, flags, STATX_BASIC_STATS | STATX_BTIME, &sx);
    if (r != 0) return r;
    out->mode = sx.stx_mode;
    out->size = sx.stx_size;
    out->mtime_sec = sx.stx_mtime.tv_sec;
    out->mtime_nsec = sx.stx_mtime.tv_nsec;
    out->ctime_sec = sx.stx_ctime.tv_sec;
    out->ctime_nsec = sx.stx_ctime.tv_nsec;
    out->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    out->ino = sx.stx_ino;
    out->has_btime = (sx.stx_mask & STATX_BTIME) ? 1 : 0;
    out->btime_sec = sx.stx_btime.tv_sec;
    out->btime_nsec = sx.stx_btime.tv_nsec;
    out->nlink = sx.stx_nlink;
    return 0;
}

int ks_flock(int fd, int op) { return flock(fd, op); }

uint64_t ks_resolve_beneath(void) { return RESOLVE_BENEATH; }
uint64_t ks_resolve_no_symlinks(void) { return RESOLVE_NO_SYMLINKS; }
int ks_o_directory(void) { return O_DIRECTORY; }
int ks_o_nofollow(void) { return O_NOFOLLOW; }
long ks_utime_omit(void) { return UTIME_OMIT; }
int ks_at_symlink_nofollow(void) { return AT_SYMLINK_NOFOLLOW; }
int ks_at_removedir(void) { return AT_REMOVEDIR; }
unsigned int ks_rename_exchange(void) { return RENAME_EXCHANGE; }
unsigned int ks_rename_noreplace(void) { return RENAME_NOREPLACE; }
int ks_lock_ex_nb(void) { return LOCK_EX | LOCK_NB; }

int ks_mallopt_arena_max(int n) { return mallopt(M_ARENA_MAX, n); }
int ks_malloc_trim(void) { return malloc_trim(0); }

int ks_mkstemp_cloexec(char *template_) {
    return mkostemp(template_, O_CLOEXEC);
}

int ks_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

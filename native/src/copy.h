// Scatter-gather copy engine used by the job pool: extents are resolved on the JS thread
// through a cache of whole-file mappings, then copied on a pool thread with plain memmove.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace vugpu::addon {

struct FileMap;  // one MAP_SHARED mapping of a whole file, unmapped when the last holder drops it

struct ExtentSpec {
  int fd;
  uint64_t offset;
  uint64_t length;
};

struct CopyPiece {
  uint8_t* p;
  size_t len;
};

struct CopyPlan {
  std::vector<CopyPiece> src, dst;
  std::vector<std::shared_ptr<FileMap>> holds;  // keeps the mappings alive while the job runs
  uint64_t bytes = 0;
};

// JS thread. Resolves both extent lists to host pointers. Returns 0, or -errno: -EBADF (bad
// fd), -EINVAL (not a regular file), -EFAULT (extent past the end of the file), -EACCES
// (destination fd is read-only), -ENOMEM (mmap failed).
int PlanCopy(const std::vector<ExtentSpec>& src, const std::vector<ExtentSpec>& dst, CopyPlan* plan);

// Pool thread. Returns 0 or -ECANCELED (checked between chunks).
int RunCopy(const CopyPlan& plan, const std::atomic<bool>& cancel);

// Drop the cached mapping of fd's file (jobs in flight keep theirs). Returns 0 or -errno.
int ForgetFile(int fd);
void ClearFileCache();

}  // namespace vugpu::addon

"""Text sources (Hub ids, local files and folders), document packing into fixed-length rows, and prefetching."""

# cmake -DSOURCE=<built .so> -DDEST=<staged liblayersync.so.X.Y.Z> -P LayerSyncStage.cmake
#
# Stages the library the way copy_if_different would (nothing happens, and nothing relinks,
# when it did not change), but replaces DEST atomically (copy to a temporary file, then
# rename): a test still running against the previous copy keeps its inode instead of
# crashing on a file rewritten under its mappings.
if(NOT EXISTS "${SOURCE}")
  message(FATAL_ERROR "${SOURCE} does not exist")
endif()
if(EXISTS "${DEST}")
  file(SHA256 "${SOURCE}" _new)
  file(SHA256 "${DEST}" _old)
  if(_new STREQUAL _old)
    return()
  endif()
endif()
get_filename_component(_dir "${DEST}" DIRECTORY)
file(MAKE_DIRECTORY "${_dir}")
string(RANDOM LENGTH 8 _tag)
file(COPY_FILE "${SOURCE}" "${DEST}.${_tag}.tmp")
file(RENAME "${DEST}.${_tag}.tmp" "${DEST}")

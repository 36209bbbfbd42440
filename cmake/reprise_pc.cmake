# reprise_pc.cmake — run by `cmake --install` after CMakeLists.txt's install(CODE) set RP_PC_*: writes reprise.pc
# for the prefix being installed to. `--prefix` chooses that prefix at install time, so a file configured when the
# build was configured would name the wrong one.
foreach(d LIBDIR INCLUDEDIR)
  if(NOT IS_ABSOLUTE "${RP_PC_${d}}")
    set(RP_PC_${d} "\${prefix}/${RP_PC_${d}}")
  endif()
endforeach()
configure_file("${RP_PC_IN}" "${RP_PC_OUT}" @ONLY)

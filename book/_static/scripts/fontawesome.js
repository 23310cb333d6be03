// GPT from Scratch: this empty file takes the place of the theme's Font Awesome script (1.5 MB;
// html_static_path files replace the theme's of the same name). The theme's stylesheet already
// draws its few icons with the Font Awesome web fonts. scripts/browser_test.py weighs the pages.
